"""The parts of bench/run.py, the site under load (bench/run.py is its command line and the
order of the run):

- dataset.py: what the receipts hold, derived from their index and a seed;
- fill.py: the fill of receipts that verify, made in processes, written by bench/_fill.py;
- server.py: the settings, the run's own database set up, gunicorn serving the site or the raw
  WSGI baseline, one HTTP request to it;
- load.py: wrk driving one route (the Lua scripts in bench/wrk/), the workers' peak RSS;
- routes.py: each route's check before its load, and its load;
- figures.py: one route's measurement, the tables, the ratios, the targets, the scaling;
- plans.py: the query plans (EXPLAIN) of the SQL the hot routes run.
"""
