from paraplan.cli.main import run

run()
