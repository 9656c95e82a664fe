"""The lab: how the tiny weights were made and probed, apart from the explorer and the library it explains.

corpus/ (the training texts, generated stories and drills, the token stream, the tokenizer's trainer),
training/ (the training loop, schedules, the drafter's and the vision tower's trainers, this project's own
look-back losses), cli/ (`python -m lab train | train-vision | dspark | corpus | dataset | tokenizer |
stories`), probes/ (research probes on a trained model, `python -m lab.probes.NAME`).

It may import anything (model/, lessons/, bench/); nothing in app.py, pages/, ui/, lessons/ or model/
imports it (tests/test_layering.py). What the app needs from the lab's work stays in the library:
model/tokenizer.py, model/heldout.py and model/scenes.py.
"""
