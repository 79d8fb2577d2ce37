"""The Textual face: the app and its widgets (transcript, prompt input and completion, approval
panel, status line, rewind picker)."""
