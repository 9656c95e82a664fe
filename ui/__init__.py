"""Streamlit-side helpers shared by the pages: model choice, caching, URL state, figures."""
