# Makes the repository root importable in tests (nanbeige41/ and the top-level scripts).
