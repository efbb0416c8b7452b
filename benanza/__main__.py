"""`python -m benanza`: the same as the `benanza` command."""

from benanza.supervisor import main

main()
