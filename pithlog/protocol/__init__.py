"""The pure core of pith-open-graph-merge-v1 (docs/protocol.md).

The door (:mod:`~pithlog.protocol.canonical`), the timestamp and pith-number rules, keys and
keyrings, envelopes (events) and the table of event types (event_types), checks 1-14, steps
0-4 (reduce), step 5 (state) and the check of a published state (state_verify). No clock, no
files, no database, no network, no processes: values in, values out.
Imports nothing of pithlog outside itself but :mod:`pithlog.errors`.
"""
