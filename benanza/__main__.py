"""`python -m benanza`: the same as the `benanza` command."""

from benanza.cli import main

main()
