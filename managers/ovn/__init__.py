"""The `ovn` manager: tenant networks as rows of the OVN Northbound database.

manager.py is the plugin (OvnManager, its config and session); commands.py what it adds to
the command line (`unet nb`), importable without the rest, so that the command line starts
quickly.

The live side, each module using only those before it (and schema.py the tables
render.py writes), with public names only: tls.py (TLS for ssl: remotes), schema.py (the
tables and columns unet reads and writes), rpc.py (unet's own OVSDB connection:
transact, locks, monitors), codec.py (rows ↔ backend objects), fence.py (the
installation's lock, and the writes only its holder can make), transaction.py (a wave's
steps as one transaction), northbound.py (observe, apply, lock) and watch.py (the
daemon's replica, kept by monitors); embedded.py (`northbound: embedded`, a server
unet starts itself) beside them.
"""
