"""pinctl pull and sync --pull: images pulled through the runtime that will use them, then pinned."""
