"""The reader: reads one untrusted email, asks a model for one narrow value, returns text.

It has no tools and no tool code; the worst a hostile email can make it do is answer wrong.
"""
