"""A league of frozen policies: ratings from finished matches (:mod:`.ratings`), who plays
whom (:mod:`.matchmaking`), and the store of snapshots in Redis (:mod:`.store`)."""
