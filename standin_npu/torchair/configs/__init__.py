"""torchair.configs (stand-in): see ``compiler_config``."""
