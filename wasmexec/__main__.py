import sys

from wasmexec._cli.entry import main

sys.exit(main())
