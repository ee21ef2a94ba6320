import sys

from wasmexec._cli.main import main

sys.exit(main())
