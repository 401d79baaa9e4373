"""Processes: forks that never outlive their command (``supervise``), a child's
phases and temp files (``phases``), interruptible calls in a child (``interrupt``).
"""
