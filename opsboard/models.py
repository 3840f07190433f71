"""The read-only ops site (a coming release; see ../shared/SPEC.md)."""
