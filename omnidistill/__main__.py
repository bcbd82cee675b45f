from omnidistill.cli import main

raise SystemExit(main())
