"""Tests of ``mplex.libp2p``; they need py-libp2p (``make test`` runs them in the
py-libp2p venv, where a missing py-libp2p fails the run)."""
