"""Documents (plain Python, no Qt): parse files, chunk them, embed the chunks, index them in
SQLite (BM25 + vectors), and retrieve passages for a chat turn as ``Source`` parts.

See docs/ARCHITECTURE.md, "Documents".
"""
