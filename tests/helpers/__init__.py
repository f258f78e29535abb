"""Helpers the tests import (and scripts they run as processes); no tests here."""
