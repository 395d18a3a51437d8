"""Tests of the emitters."""
