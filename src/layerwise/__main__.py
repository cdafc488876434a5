"""`python -m layerwise ...` (and `torchrun -m layerwise ...`): the same as the `layerwise` command."""
import sys

from layerwise.cli import main

sys.exit(main())
