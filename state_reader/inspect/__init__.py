"""What a checkpoint says when you look at it as a whole: statistics, the doctor's
findings, verification, schema checks, the overview the displays draw, change
feeds, exports and flattened tables. Built on :mod:`state_reader.core`; the ways
in (:mod:`state_reader.fronts`) call these and render what they return."""
