"""One unit's evaluation: one model on one dataset's variants, chunk by chunk, into records.

- :mod:`.driver`: :func:`~sago_fast.units.driver.drive_unit`, the one way through a unit (``UnitJob``);
- :mod:`.chunk`: a chunk planned, answered and scored into records, and a unit finished from its chunks;
- :mod:`.unit_records`: the typed records a chunk and a unit's end produce (what the sinks turn into rows);
- :mod:`.sequential`: sequential units (``--precision``, ``--budget``): when a unit stops;
- :mod:`.separation`: comparisons of neighbouring models settled as they go (``--until-separated``);
- :mod:`.stream_settings`: the memory budgets a unit streams under.

The run (:mod:`sago_fast.run`) plans units, claims them and writes what they produce.
"""
