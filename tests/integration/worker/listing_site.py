"""A paginated shop listing for the test site: `chain` pages of products, each page linking to
the next one with `a.next` (relative links, as shops write them) and to its products' detail
pages with `a.product`; the last page's "next" is a disabled button, as on most shops. Each
detail page links to its product's reviews page with `a.reviews` (list -> detail -> reviews)
and shows its specs (`p.specs`) once `button.specs` is clicked.

Served as static HTML, so both engines read the same pages (HostileSite's /page/<name>).
"""

from __future__ import annotations

from .site import HostileSite

ITEMS_PER_PAGE = 3


def listing_name(page: int) -> str:
    return f"list-{page}"


def detail_name(page: int, item: int) -> str:
    return f"item-{page}-{item}"


REVIEWS_PER_PRODUCT = 2


def reviews_name(page: int, item: int) -> str:
    return f"reviews-{page}-{item}"


def expected_reviews(page: int, item: int) -> list[dict[str, str]]:
    """The reviews of a product, as items {author, text} extracts them."""
    return [
        {"author": f"Reviewer {review}", "text": f"Review {review} of product {page}.{item}"}
        for review in range(1, REVIEWS_PER_PRODUCT + 1)
    ]


def expected_items(page: int) -> list[dict[str, str]]:
    """The items of listing page `page`, as items {name, price} extracts them."""
    return [
        {"name": f"Product {page}.{item}", "price": f"{page}.{item}0"}
        for item in range(1, ITEMS_PER_PAGE + 1)
    ]


def register_listing(site: HostileSite, chain: int) -> None:
    """Register listing pages 1..`chain` and their products' detail pages."""
    for page in range(1, chain + 1):
        products = "".join(
            f'<li class="product"><a class="product" href="{detail_name(page, item)}">'
            f'<span class="name">Product {page}.{item}</span></a>'
            f'<span class="price">{page}.{item}0</span></li>'
            for item in range(1, ITEMS_PER_PAGE + 1)
        )
        more = (
            f'<a class="next" href="{listing_name(page + 1)}">Next</a>'
            if page < chain
            else '<button class="next" disabled>Next</button>'
        )
        back = f'<a class="prev" href="{listing_name(page - 1)}">Previous</a>' if page > 1 else ""
        site.pages[listing_name(page)] = (
            f"<html><head><title>Listing {page}</title></head><body>"
            f"<h1>Page {page}</h1><ul>{products}</ul><nav>{back}{more}</nav></body></html>"
        )
        for item in range(1, ITEMS_PER_PAGE + 1):
            site.pages[detail_name(page, item)] = (
                f"<html><head><title>Product {page}.{item}</title></head><body>"
                f'<h1 class="name">Product {page}.{item}</h1>'
                f'<p class="description">About product {page}.{item}</p>'
                # The specs appear on a click, as a script writes them (a route's steps).
                f'<button class="specs" onclick="const p = document.createElement(\'p\'); '
                f"p.className = 'specs'; p.textContent = 'Specs of {page}.{item}'; "
                f'document.body.appendChild(p)">Specs</button>'
                f'<a class="reviews" href="{reviews_name(page, item)}">Reviews</a></body></html>'
            )
            reviews = "".join(
                f'<li class="review"><b class="author">Reviewer {review}</b>'
                f'<p class="text">Review {review} of product {page}.{item}</p></li>'
                for review in range(1, REVIEWS_PER_PRODUCT + 1)
            )
            site.pages[reviews_name(page, item)] = (
                f"<html><head><title>Reviews of {page}.{item}</title></head><body>"
                f"<ul>{reviews}</ul></body></html>"
            )
