"""Pure integrity primitives: encodings, RFC 8785, Ed25519 keys, the RFC 9162 Merkle log and
C2SP signed notes. Nothing here imports Django, so verifiers and tests can use it alone."""
