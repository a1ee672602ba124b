"""The `ovn` manager: tenant networks as rows of the OVN Northbound database.

manager.py is the plugin (OvnManager, its config and session); commands.py what it adds to
the command line (`unet nb`), importable without the rest, so that the command line starts
quickly.
"""
