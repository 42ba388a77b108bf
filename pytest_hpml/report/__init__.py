"""Layer 6, reports: the header lines, the terminal summary, the JSON, Markdown and HTML reports,
and the pytest-hpml command line."""
