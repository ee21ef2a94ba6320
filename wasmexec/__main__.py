import sys

from wasmexec._cli import main

sys.exit(main())
