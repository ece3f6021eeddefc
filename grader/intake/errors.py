"""What goes wrong reading a class's submissions."""


class IntakeError(ValueError):
    """SUBMISSIONS or the roster cannot be read; the message says what to do."""
