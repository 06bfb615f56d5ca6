"""`python -m amqp_broker`: same as the `amqp-broker` command."""

import sys

from amqp_broker.cli.broker import main

sys.exit(main())
