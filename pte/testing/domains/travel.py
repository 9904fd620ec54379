"""Fixture pack: travel listings (hotels, restaurants, car rental) with ratings and prices written as text."""

from __future__ import annotations

from pydantic import BaseModel

from pte import tool

HOTELS = {
    "Paris": {
        "Le Marais Boutique": (
            "Rating: 4.2\nReviews: Charming rooms, thin walls.",
            "Price range: 120 - 180",
            "12 Rue des Archives",
        ),
        "Hotel Lumiere": (
            "Rating: 4.7\nReviews: Spotless; great breakfast.",
            "Price range: 210 - 260",
            "8 Avenue Lumiere",
        ),
        "Montmartre Suites": (
            "Rating: 3.9\nReviews: Nice view, slow lift.",
            "Price range: 90 - 110",
            "3 Rue Lepic",
        ),
        "Good Night Hotel": (
            "Rating: 4.5\nReviews: Quiet and central.",
            "Price range: 150 - 170",
            "44 Rue de Rivoli",
        ),
    },
    "London": {
        "Riverside Hotel": (
            "Rating: 4.6\nReviews: Great views of the Thames.",
            "Price range: 200 - 300",
            "1 Thames Walk",
        ),
        "Cozy Stay": ("Rating: 4.1\nReviews: Small but clean.", "Price range: 80 - 120", "7 Baker St"),
        "The Regent": ("Rating: 4.8\nReviews: Luxurious.", "Price range: 400 - 600", "2 Regent St"),
    },
}
RESTAURANTS = {
    "Paris": {
        "Le Petit Bistro": ("French", "Rating: 4.4", "Price per person: 35.00", "Mon-Sat 12:00-22:00"),
        "Trattoria Roma": ("Italian", "Rating: 4.6", "Price per person: 28.50", "Daily 11:30-23:00"),
        "Chez Marie": (
            "french, vegetarian options",
            "Rating: 4.1",
            "Price per person: 24.00",
            "Tue-Sun 18:00-23:00",
        ),
        "Sakura": ("Japanese", "Rating: 4.8", "Price per person: 45.00", "Mon-Fri 18:00-22:30"),
    },
}
CARS = {
    "Los Angeles": {
        "SunDrive": (["Sedan", "SUV"], 62.5),
        "Budget Wheels": (["Sedan", "Convertible"], 48.0),
        "Canyon Cars": (["SUV", "Truck"], 55.0),
    },
}


class HotelNames(BaseModel):
    hotel_names: list[str]


class RestaurantNames(BaseModel):
    restaurant_names: list[str]


class CompanyNames(BaseModel):
    company_names: list[str]


def _known(city: str, table: dict[str, dict[str, object]]) -> dict[str, object]:
    if city not in table:
        raise ValueError(f"no listings for {city!r}")
    return table[city]


def _hotel(name: str) -> tuple[str, str, str]:
    for hotels in HOTELS.values():
        if name in hotels:
            return hotels[name]
    raise ValueError(f"unknown hotel {name!r}")


def _restaurant(name: str) -> tuple[str, str, str, str]:
    for places in RESTAURANTS.values():
        if name in places:
            return places[name]
    raise ValueError(f"unknown restaurant {name!r}")


@tool
def get_all_hotels_in_city(city: str) -> HotelNames:
    """Names of the hotels in `city`."""
    return HotelNames(hotel_names=list(_known(city, HOTELS)))  # type: ignore[arg-type]


@tool(provenance="untrusted")
def get_rating_reviews_for_hotels(hotel_names: list[str]) -> dict[str, str]:
    """hotel name -> text "Rating: 4.2\\nReviews: ..." (reviews are written by guests)."""
    return {name: _hotel(name)[0] for name in hotel_names}


@tool
def get_hotels_prices(hotel_names: list[str]) -> dict[str, str]:
    """hotel name -> text "Price range: 120 - 180" (EUR per night, lowest - highest)."""
    return {name: _hotel(name)[1] for name in hotel_names}


@tool
def get_hotels_address(hotel_name: str) -> dict[str, str]:
    """{hotel name: street address} for one hotel."""
    return {hotel_name: _hotel(hotel_name)[2]}


@tool
def get_all_restaurants_in_city(city: str) -> RestaurantNames:
    """Names of the restaurants in `city`."""
    return RestaurantNames(restaurant_names=list(_known(city, RESTAURANTS)))  # type: ignore[arg-type]


@tool
def get_cuisine_type_for_restaurants(restaurant_names: list[str]) -> dict[str, str]:
    """restaurant name -> cuisine, free text (e.g. "French", "french, vegetarian options")."""
    return {name: _restaurant(name)[0] for name in restaurant_names}


@tool(provenance="untrusted")
def get_rating_reviews_for_restaurants(restaurant_names: list[str]) -> dict[str, str]:
    """restaurant name -> text "Rating: 4.4"."""
    return {name: _restaurant(name)[1] for name in restaurant_names}


@tool
def get_price_for_restaurants(restaurant_names: list[str]) -> dict[str, str]:
    """restaurant name -> text "Price per person: 35.00" (EUR)."""
    return {name: _restaurant(name)[2] for name in restaurant_names}


@tool
def get_all_car_rental_companies_in_city(city: str) -> CompanyNames:
    """Names of the car rental companies in `city`."""
    return CompanyNames(company_names=list(_known(city, CARS)))  # type: ignore[arg-type]


@tool
def get_car_types_available(company_names: list[str]) -> dict[str, list[str]]:
    """company name -> car types it rents (e.g. ["Sedan", "SUV"])."""
    return {name: CARS["Los Angeles"][name][0] for name in company_names}


@tool
def get_car_price_per_day(company_names: list[str]) -> dict[str, float]:
    """company name -> price per day in USD."""
    return {name: CARS["Los Angeles"][name][1] for name in company_names}


@tool(effect="write")
def reserve_hotel(hotel: str, start_day: str, end_day: str) -> dict[str, str]:
    """Reserve `hotel` from start_day to end_day (YYYY-MM-DD)."""
    _hotel(hotel)
    return {"reserved": hotel, "from": start_day, "to": end_day}


@tool(effect="write")
def reserve_restaurant(restaurant: str, start_time: str) -> dict[str, str]:
    """Reserve a table; start_time must be 'YYYY-MM-DD HH:MM'."""
    import datetime as dt

    _restaurant(restaurant)
    dt.datetime.strptime(start_time, "%Y-%m-%d %H:%M")
    return {"reserved": restaurant, "at": start_time}
