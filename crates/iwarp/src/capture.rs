//! pcap capture of the provider's own traffic.
