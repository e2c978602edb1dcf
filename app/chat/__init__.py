"""The turn layer (plain Python, no Qt), between the workers / server and the engines:
typed message parts (``parts``), turn events (``events``), the ``Backend`` contract
(``backend``), typed messages down to a backend's (``render``) and one turn as a generator
(``turn.run_turn``)."""
