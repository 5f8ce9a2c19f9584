"""`python -m craftai.cli`: the `craftai` command, wherever the packages import."""

from craftai.cli import main

raise SystemExit(main())
