"""arch"""
