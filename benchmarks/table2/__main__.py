"""``python -m benchmarks.table2``: the command line of :mod:`benchmarks.table2.command`."""
from avalanche_sdr import cli
from benchmarks.table2.command import main, parse_args

__all__: list = []

if __name__ == "__main__":
    # Hide the third-party warnings a user cannot act on before the engine imports
    # Avalanche (avalanche_sdr.cli); the run workers print no warning (executors._job).
    cli.install_warning_filters()
    cli.run_cli(main, parse_args)
