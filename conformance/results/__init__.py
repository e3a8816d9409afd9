"""The results kernel: what every part of the harness shares and nothing of pytest.

- `records`: the results lake's schema (runs, tests, frames) and its Parquet writer;
- `lake`: the traffic recorder's writer into the same lake;
- `verdicts`: verdicts, their order, score and labels, exit statuses and their texts;
- `wording`: how counts read in English;
- `judge`: the one mapping from an observation (an exception) to a verdict;
- `client_runs`: how a client-side run's records name a scenario and a client's language.

The pytest plugin (`conformance.plugin`), the client judge, the gate, the recorder and the
reports import from here; nothing here imports them.
"""
