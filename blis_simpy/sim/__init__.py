"""The top layer: wire a resolved scenario into one SimPy environment (`build`), run it and
turn its records into a `Result` (`run`). Everything below is assembled here and only here."""
