"""surgeon extract and sanitize: cutting, folding, validating and optimizing graphs."""
