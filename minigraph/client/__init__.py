"""Running graphs."""
