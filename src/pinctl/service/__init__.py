"""The service layer: match, plan and apply. No click, no printing; errors are exceptions."""
