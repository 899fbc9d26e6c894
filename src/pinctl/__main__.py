from pinctl.cli import main

main()
