"""What the user sees: tables, JSON envelopes, progress and log lines. No work is done here."""
