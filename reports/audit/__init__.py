"""The trace audit: recorded frames judged by the conformance model, on Spark or in one process.

Where each part runs:
- `plan`: the driver. Builds the Spark plan (runs packed into shuffle-free tasks, or frames
  grouped by (run, test, connection, channel)) and collects the findings.
- `partition`: the executors (the body of each Spark task): read run partitions or a channel's
  frames, replay each channel's frames through the model (`conformance.model.recorded_channel`),
  return the findings as Arrow tables.
- `context`: what is known of each recorded connection (the broker's profile, the client's
  capabilities, deletions elsewhere in the recording); built where the frames are (the tasks of
  the shuffle-free plan, the driver for the grouped plan).
- `lake`: the lake's run partitions (listed and packed by the driver) and the single-process
  audit of a whole lake (the `driver` plan).
- `findings`: the findings as the report shows them, each with its frame window (the driver,
  one Spark join).
- `channel`: one channel given as Python values (tests, small traces).
"""
