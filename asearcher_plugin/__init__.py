"""asearcher-plugin: long-horizon search agents for OpenRLHF."""
