"""One package per platform (plus the terminal), and what they share: `intake` (what happens to
a message between the platform and the core, decided once) and `live` (answers shown while they
are written). Adapters translate; the intake and the core decide."""
