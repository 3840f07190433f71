"""Golden sets, eval runs and release gates (a coming release; see ../shared/SPEC.md)."""
