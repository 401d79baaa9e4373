"""inspect model and inspect data: text and JSON descriptions."""
