"""``python -m pipeline`` is the ``rowgate`` command."""

from pipeline.entry import main

if __name__ == "__main__":
    main()
