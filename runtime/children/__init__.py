"""What runs after fork: the child loop that runs one job at a time. Never imports redis."""
