"""The whole-model stages the model flow (flows/model/) runs; the network, never the cost model.

Where the time goes: `profile.py`, `in_model_times.py` (each dispatch timed inside runs of the
whole model), `dispatch_times.py`, `hot.py`, `headroom.py` (how far each dispatch runs from the
model's fastest, which weighs the hot set), `static_rank.py`, `gate.py`;
dispatches that differ only in what they reduce, tuned as a group: `kin.py`. The model under
tuning: `prepare.py`, `real_inputs.py`, `outputs.py`. Its variants (the tuned dispatches' specs
linked and tried in the model): `candidates.py`, `variants.py`, `variant_build.py`,
`variant_sessions.py`, `variant_profiles.py` (each candidate read inside the profiled
variants), `select.py`, `final_check.py`. Timing whole models side by side:
`timing.py` and the runtime-only `worker.py`; against ONNX Runtime: `ort_compare.py` and
`ort_worker.py` (flows/model/deployment.py reports it).
"""
