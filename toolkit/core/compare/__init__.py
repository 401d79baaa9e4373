"""Comparison maths: tolerances (``tolerances``, no numpy), array comparisons
(``arrays``), what error is rounding (``noise``), undefined values (``undefined``).
"""
