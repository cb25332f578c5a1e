"""Model shapes from outside the config: cfgcheck's preset registry (``presets``), and model
folders / Hub ids. Importing this package imports nothing heavy."""
