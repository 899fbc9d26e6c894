"""Pins as pure logic over rows and label stores: CRI-O-style patterns, the policy, the pin labels,
ls rows and their reasons, pin/unpin/sync plans and their guarded apply, config lint and export."""
