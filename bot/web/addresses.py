"""Which addresses a fetch may connect to: none of the host's own network.

A URL names a host; what is checked is every address the name resolves to, after resolution,
and the connection then goes to those checked addresses and no others (a second resolution
could answer differently: DNS rebinding). Refused: loopback, private, link-local (which holds
the cloud metadata address 169.254.169.254), shared (CGNAT), multicast, reserved and
unspecified addresses, and their IPv6 forms, an IPv4 address hidden in an IPv6 one (mapped,
6to4, Teredo, NAT64) judged as the IPv4 one. An operator may allow hosts (`[web]
allow_hosts`, a name or name:port as the URL says it) or networks (`allow_networks`, CIDR):
that is also how the tests reach their fakes on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
NAT64 = ipaddress.ip_network("64:ff9b::/96")


class RefusedAddress(Exception):
    """The host is refused (on the host's own network, or not resolvable); the message says
    why, in words for the model and the person."""


@dataclass(frozen=True)
class Allowed:
    """What the operator allows besides the public internet."""

    hosts: frozenset[str] = frozenset()  # "name" or "name:port", lower case
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def of(cls, hosts: list[str], networks: list[str]) -> Allowed:
        """From the config's lists (checked there: bot/config.py WebConfig)."""
        return cls(
            frozenset(host.strip().lower() for host in hosts if host.strip()),
            tuple(ipaddress.ip_network(net.strip(), strict=False) for net in networks),
        )

    def host(self, host: str, port: int) -> bool:
        name = host.lower().strip("[]")
        return (
            name in self.hosts
            or f"{name}:{port}" in self.hosts
            or (f"[{name}]:{port}" in self.hosts)
        )

    def address(self, ip: IPAddress) -> bool:
        return any(ip.version == net.version and ip in net for net in self.networks)


def why_refused(ip: IPAddress) -> str | None:
    """Why `ip` is not on the public internet ("loopback", …); None when it is."""
    inner = _embedded_ipv4(ip)
    if inner is not None:
        return why_refused(inner)
    if ip.is_loopback:
        return "a loopback address (this machine)"
    if ip.is_link_local:
        return "a link-local address (where cloud metadata lives)"
    if ip.is_unspecified:
        return "an unspecified address (this machine)"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_private:
        return "a private network address"
    if ip.is_reserved:
        return "a reserved address"
    if not ip.is_global:
        return "an address that is not on the public internet"
    return None


def _embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (mapped, 6to4, Teredo server/client, NAT64)."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]  # the client's address: where the packets end up
    if ip in NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


@dataclass(frozen=True)
class Resolved:
    """A host's checked addresses: the only ones a connection to it may use."""

    host: str
    port: int
    addresses: tuple[tuple[int, str], ...]  # (socket family, address)


async def resolve_checked(host: str, port: int, allowed: Allowed) -> Resolved:
    """Every address `host` resolves to, each checked; RefusedAddress if any is refused (a
    name that answers with a public and a private address is refused whole) or none is found."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise RefusedAddress(f"the host {host!r} could not be found") from exc
    found: dict[tuple[int, str], None] = {}
    host_allowed = allowed.host(host, port)
    for family, _, _, _, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        text = str(sockaddr[0]).split("%", 1)[0]  # an IPv6 zone is not part of the address
        ip = ipaddress.ip_address(text)
        why = why_refused(ip)
        if why is not None and not (host_allowed or allowed.address(ip)):
            raise RefusedAddress(
                f"{host} is {why}; pages of the bot's own network are never fetched"
            )
        found[(family, text)] = None
    if not found:
        raise RefusedAddress(f"the host {host!r} has no internet address")
    return Resolved(host, port, tuple(found))
