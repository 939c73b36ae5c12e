"""The Spark session: `local[*]` by default, a master or a Spark Connect URL by configuration.

Loopback only. May import nothing of the project but `resources.errors` and `resources.settings`.
"""
