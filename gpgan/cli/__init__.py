"""The command lines: ``gpgan-train``, ``gpgan-sample``, ``gpgan-eval`` and ``gpgan-ablate``. Each
parses its arguments, calls the library, and turns errors into one-line messages and exit
statuses; nothing in gpgan imports this package."""
